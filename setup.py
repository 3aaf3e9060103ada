"""Build of the optional compiled wire fast path (``wire._fastwire``).

Everything else about the package is in pyproject.toml. The extension is
optional: where it cannot be built (no C compiler, no OpenSSL headers), the
package still installs and Braid runs on the pure-Python codec
(``wire.codec.IMPLEMENTATION == "python"``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "wire._fastwire",
            sources=["wire/_fastwire.c", "wire/_fastwire_crypto.c", "wire/_fastwire_sealer.c",
                     "wire/_fastwire_opener.c", "wire/_fastwire_rx.c"],
            depends=["wire/_fastwire.h"],
            libraries=["crypto"],
            # Only PyInit__fastwire is exported; the files share the rest.
            extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden",
                                "-Wall", "-Wextra",
                                "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                                "-Wno-cast-function-type"],
            optional=True,
        )
    ],
)
