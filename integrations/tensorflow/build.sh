#!/usr/bin/env bash
# Builds the Python package chorus_tf (its op library _chorus_ops.so) against an installed
# libchorus and the TensorFlow of a Python interpreter:
#   integrations/tensorflow/build.sh PREFIX OUTDIR PYTHON
# PREFIX is where tools/install.sh put Chorus; the package goes to OUTDIR/chorus_tf (put OUTDIR
# on PYTHONPATH); PYTHON is an interpreter that imports tensorflow (tools/install_deps.sh makes
# one in a virtual environment). The library finds libchorus.so through its RUNPATH.
set -euo pipefail
prefix=$1
out=$2/chorus_tf
python=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cp "$here/chorus_tf/__init__.py" "$out/"
read -r -a tf_flags < <("$python" -c '
import tensorflow as tf
flags = [f.replace("-I", "-isystem", 1) if f.startswith("-I") else f
         for f in tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()]
flags += ["-Wl,-rpath," + f[2:] for f in tf.sysconfig.get_link_flags() if f.startswith("-L")]
print(" ".join(flags))' 2>/dev/null)
g++ -O2 -fPIC -shared -Wall -Wextra -Wno-unused-parameter -Werror \
  "$here/csrc/chorus_ops.cc" -I"$prefix/include" "${tf_flags[@]}" \
  -L"$prefix/lib" -Wl,-rpath,"$prefix/lib" -lchorus -o "$out/_chorus_ops.so"
echo "built $out/_chorus_ops.so"
