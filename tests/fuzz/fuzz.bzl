"""chorus_fuzz_target: one libFuzzer target, its fuzzer binary and its corpus replay test."""

def chorus_fuzz_target(name, deps):
    """Defines, for the fuzz target in `<name>.cc` and its corpus in `corpus/<name>/`:

    <name>_lib            the target's LLVMFuzzerTestOneInput (alwayslink: the fuzzer's own
                          main, linked in by -fsanitize=fuzzer, is what references it);
    <name>                the libFuzzer binary. Tagged manual: it links only under
                          --config=fuzz with clang (tools/fuzz.sh), so `//...` skips it;
    <name>_replay_test    a Catch2 test that feeds every corpus file to the target in the
                          ordinary build.
    """
    library = name + "_lib"
    native.cc_library(
        name = library,
        srcs = [name + ".cc"],
        deps = deps + [":fuzz_check"],
        alwayslink = True,
    )
    native.cc_binary(
        name = name,
        deps = [":" + library],
        tags = ["manual"],
    )
    corpus = "corpus/" + name
    native.cc_test(
        name = name + "_replay_test",
        size = "small",
        srcs = ["corpus_replay_test.cc"],
        data = native.glob([corpus + "/*"]),
        local_defines = ['CHORUS_FUZZ_CORPUS=\\"%s/%s\\"' % (native.package_name(), corpus)],
        deps = [
            ":" + library,
            "//third_party:catch2_main",
        ],
    )
