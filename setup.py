"""Build of the optional C extensions; everything else is in pyproject.toml.

- stream_nb.features._native computes TextFeaturizer's feature lists in C for the configurations
  it takes (stream_nb/features/text.py stays the definition).
- stream_nb.events._codec writes the worker's prediction messages in C for the contract's common
  shape (stream_nb/events/codec.py stays the definition).
- stream_nb.model._kernel runs MultinomialNB's prequential loop (score, decide, learn) in C for
  batches whose counts are exact (stream_nb/model/counting.py stays the definition). It calls
  numpy's own log loop, so it compiles against numpy's headers (a build requirement).
- stream_nb.mail._native reads HTML documents made of plain constructs and the relays of
  Received headers in C (stream_nb/mail/html.py and parse.py stay the definitions; anything
  else is left to them).

All are optional: when one cannot be compiled (no C compiler), the install goes on and the
Python path runs, with the same results.
"""

from setuptools import Extension, setup

try:
    import numpy
except ImportError:  # a build without numpy: the kernel is left out, the Python path runs
    numpy = None

# No fused multiply-add: the kernels repeat numpy's operations one rounding at a time.
STRICT_FLOATS = ["-ffp-contract=off"]

extensions = [
    Extension("stream_nb.features._native", sources=["stream_nb/features/_native.c"], optional=True),
    Extension("stream_nb.events._codec", sources=["stream_nb/events/_codec.c"], optional=True),
    Extension("stream_nb.mail._native", sources=["stream_nb/mail/_native.c"], optional=True),
]
if numpy is not None:
    extensions.append(Extension("stream_nb.model._kernel", sources=["stream_nb/model/_kernel.c"],
                                include_dirs=[numpy.get_include()], extra_compile_args=STRICT_FLOATS,
                                optional=True))

setup(ext_modules=extensions)
