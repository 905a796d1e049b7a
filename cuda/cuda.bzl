"""cuda_object: compiles one .cu file with nvcc into an object that a cc_library links.

Bazel 4 has no CUDA rules and none can be downloaded, so this rule calls the toolkit's nvcc
directly, with the include paths of its cc_library deps. Only --config=cuda builds reach it
(cuda/BUILD); NVCC names the compiler (default /usr/local/cuda/bin/nvcc)."""

def _cuda_object_impl(ctx):
    contexts = [dep[CcInfo].compilation_context for dep in ctx.attr.deps]
    out = ctx.actions.declare_file(ctx.label.name + ".o")
    args = ctx.actions.args()
    args.add_all(["-c", "-std=c++17", "-O3", "-Xcompiler=-fPIC", "-Werror=all-warnings"])
    for arch in ctx.attr.architectures:
        args.add("-gencode=arch=compute_{0},code=sm_{0}".format(arch))

    # PTX of the newest architecture, so newer GPUs JIT-compile it.
    args.add("-gencode=arch=compute_{0},code=compute_{0}".format(ctx.attr.architectures[-1]))
    for context in contexts:
        args.add_all(context.includes, before_each = "-I")
        args.add_all(context.quote_includes, before_each = "-I")
        args.add_all(context.system_includes, before_each = "-isystem")
        args.add_all(context.defines, before_each = "-D")
    args.add("-o", out)
    args.add(ctx.file.src)
    ctx.actions.run(
        executable = ctx.attr.nvcc,
        arguments = [args],
        inputs = depset([ctx.file.src], transitive = [c.headers for c in contexts]),
        outputs = [out],
        mnemonic = "Nvcc",
        progress_message = "nvcc %s" % ctx.file.src.short_path,
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]))]

cuda_object = rule(
    implementation = _cuda_object_impl,
    attrs = {
        "src": attr.label(allow_single_file = [".cu"], mandatory = True),
        "deps": attr.label_list(providers = [CcInfo]),
        # Hopper (H100, H200) and Ampere (A100) natively; PTX of the last for what is newer.
        "architectures": attr.string_list(default = ["80", "90"]),
        "nvcc": attr.string(default = "/usr/local/cuda/bin/nvcc"),
    },
)
