"""chorus_library: the self-contained libchorus.so and libchorus.a.

Both are made from one relocatable object: every Chorus archive that `dep` (the C API) pulls
in, plus Debian's static Abseil, hiredis and OpenSSL archives (their few members that cannot go into a
shared object are rebuilt as PIC by `static_overrides`), linked with `ld -r`; then every global
symbol but the C API's and the standard library's is made local (link_libchorus.sh says why).
So the shared and the static library export the same thing, the C API, and a program that
brings its own Abseil (a framework) never meets ours. The system libraries named by other -l
flags (librt, libpthread, libdl) stay dynamic.
"""

_STATIC_PREFIXES = ["absl_", "hiredis", "ssl", "crypto"]
_SYSTEM_LIB_DIR = "/usr/lib/x86_64-linux-gnu"

def _link_inputs(dep):
    archives = []
    static_flags = []
    dynamic_flags = []
    for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
        for library in linker_input.libraries:
            archive = library.pic_static_library or library.static_library
            if archive:
                archives.append(archive)
            else:
                # A library of prebuilt objects only (the CUDA kernels nvcc compiled).
                archives.extend(library.pic_objects or library.objects or [])
        for flag in linker_input.user_link_flags:
            name = flag[2:] if flag.startswith("-l") else None
            if name and [p for p in _STATIC_PREFIXES if name.startswith(p)]:
                flag = "%s/lib%s.a" % (_SYSTEM_LIB_DIR, name)
                if flag not in static_flags:
                    static_flags.append(flag)
            elif flag not in dynamic_flags:
                dynamic_flags.append(flag)
    return archives, static_flags, dynamic_flags

def _chorus_library_impl(ctx):
    archives, static_libs, dynamic_flags = _link_inputs(ctx.attr.dep)
    # The PIC replacements of archive members come first, so those members are never pulled.
    overrides = [
        a
        for a in _link_inputs(ctx.attr.static_overrides)[0]
        if a not in archives
    ]
    archives = overrides + archives
    static_out = ctx.outputs.static_library
    shared_out = ctx.outputs.shared_library
    version_h = ctx.file.version_header
    toolchain = ctx.attr._cc_toolchain[cc_common.CcToolchainInfo]
    args = ctx.actions.args()
    args.add_all([static_out, shared_out, ctx.file.version_script, version_h])
    # The toolchain's own tools (by absolute path: gcc finds its plugins relative to itself).
    args.add_all([
        toolchain.compiler_executable,
        toolchain.ld_executable,
        toolchain.objcopy_executable,
        toolchain.ar_executable,
    ])
    args.add("--archives")
    args.add_all(archives)
    args.add("--static-libs")
    args.add_all(static_libs)
    args.add("--dynamic-flags")
    args.add_all(dynamic_flags)
    ctx.actions.run(
        executable = ctx.executable._link_script,
        arguments = [args],
        inputs = depset(
            archives + [ctx.file.version_script, version_h],
            transitive = [toolchain.all_files],
        ),
        outputs = [static_out, shared_out],
        mnemonic = "ChorusLibrary",
        use_default_shell_env = True,
        progress_message = "Linking self-contained libchorus",
    )
    return [DefaultInfo(files = depset([shared_out, static_out]))]

chorus_library = rule(
    implementation = _chorus_library_impl,
    attrs = {
        "dep": attr.label(providers = [CcInfo], mandatory = True),
        # Sources of system archive members that must be recompiled as PIC (absl_pic/README.md).
        "static_overrides": attr.label(providers = [CcInfo], mandatory = True),
        "version_script": attr.label(allow_single_file = True, mandatory = True),
        "version_header": attr.label(allow_single_file = True, mandatory = True),
        "_cc_toolchain": attr.label(
            default = Label("@bazel_tools//tools/cpp:current_cc_toolchain"),
        ),
        "_link_script": attr.label(
            default = "//packaging:link_libchorus",
            executable = True,
            cfg = "host",
        ),
    },
    # Named outputs, so that other targets can name //:libchorus.a and //:libchorus.so.
    outputs = {
        "shared_library": "lib%{name}.so",
        "static_library": "lib%{name}.a",
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
