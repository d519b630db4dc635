# The `swift build` flags of the binary the package ships (after `-c release`), for every script that builds it.
# --static-swift-stdlib: the Swift runtime linked into the binary (the package depends on no toolchain).
# --disable-local-rpath: no RUNPATH=$ORIGIN (nothing is loaded from beside the binary; lintian flags it).
# -z now: full RELRO (Debian's hardening default; lintian's hardening-no-bindnow otherwise).
SHIPPED_BUILD_FLAGS=(--static-swift-stdlib --disable-local-rpath -Xlinker -z -Xlinker now)
