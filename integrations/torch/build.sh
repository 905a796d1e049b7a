#!/usr/bin/env bash
# Builds the Python package chorus_torch, the torch.distributed backend "chorus", against an
# installed libchorus and the torch of a Python interpreter:
#   integrations/torch/build.sh PREFIX OUTDIR [PYTHON]
# PREFIX is where tools/install.sh put Chorus; the package is written to OUTDIR/chorus_torch
# (put OUTDIR on PYTHONPATH); PYTHON defaults to /usr/bin/python3 (Debian's python3-torch). The
# module finds libchorus.so through its RUNPATH (PREFIX/lib).
set -euo pipefail
prefix=$1
out=$2/chorus_torch
python=${3:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cp "$here/chorus_torch/__init__.py" "$out/"
read -r -a torch_flags < <("$python" - <<'PY'
import sysconfig, torch.utils.cpp_extension as ext
# torch's and Python's headers are system headers: their warnings are not ours.
flags = ["-isystem" + p for p in ext.include_paths()]
flags += ["-isystem" + sysconfig.get_paths()["include"]]
flags += ["-L" + p for p in ext.library_paths()] + ["-Wl,-rpath," + p for p in ext.library_paths()]
flags += ["-D_GLIBCXX_USE_CXX11_ABI=%d" % int(__import__("torch")._C._GLIBCXX_USE_CXX11_ABI)]
print(" ".join(flags))
PY
)
suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
g++ -std=c++17 -O2 -fPIC -shared -Wall -Wextra -Wno-unused-parameter -Werror \
  -DTORCH_EXTENSION_NAME=_C -DTORCH_API_INCLUDE_EXTENSION_H \
  "${torch_flags[@]}" -I"$prefix/include" -I"$here/csrc" \
  "$here/csrc/process_group_chorus.cc" "$here/csrc/module.cc" \
  -L"$prefix/lib" -Wl,-rpath,"$prefix/lib" -lchorus \
  -lc10 -ltorch -ltorch_cpu -ltorch_python \
  -o "$out/_C$suffix"
echo "built $out/_C$suffix"
