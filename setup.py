"""Build of the optional C extension; everything else is in pyproject.toml.

stream_nb.features._native computes TextFeaturizer's feature lists in C for the configurations
it takes (see stream_nb/features/text.py, which stays the definition). It is optional: when it
cannot be compiled (no C compiler), the install goes on and the Python path runs, with the same
results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "stream_nb.features._native",
            sources=["stream_nb/features/_native.c"],
            optional=True,
        )
    ]
)
