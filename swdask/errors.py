"""Exceptions raised by swdask.

Every class subclasses both :class:`SwdaskError` (catch everything swdask raises on
bad input) and the built-in exception a Python user would expect, so that
``except ValueError`` keeps working.  Messages are one line that names the file,
record and position where there is one; the CLI prints that line and exits 2.
"""


class SwdaskError(Exception):
    """Base class of every error swdask raises on bad input or bad state."""


class InvalidSequenceError(SwdaskError, ValueError):
    """A residue is not in the alphabet, or a record is empty."""


class SequenceFormatError(SwdaskError, ValueError):
    """A FASTA/FASTQ file is malformed (not FASTA/FASTQ, truncated, bad quality line)."""


class ScoringError(SwdaskError, ValueError):
    """An unknown matrix, a malformed matrix file, or invalid gap penalties."""


class StoreError(SwdaskError, ValueError):
    """A sequence store is missing, damaged, or of an unsupported version."""


class SchemaError(SwdaskError, ValueError):
    """A table does not match its schema in ``swdask.parquet_schemas``.

    swdask raises this class, also where the schema package's own ``SchemaError`` (a
    ``ValueError``, not a ``SwdaskError``) reports the mismatch: ``swdask.tables`` turns
    one into the other, with the same message.
    """


class EmptyInputError(SwdaskError, ValueError):
    """An input file or database holds no sequences."""


class InputNotFoundError(SwdaskError, FileNotFoundError):
    """An input path does not exist."""


class OutputExistsError(SwdaskError, FileExistsError):
    """The output path exists and overwriting was not requested (``--force``)."""


class OutputError(SwdaskError, OSError):
    """An output cannot go where it was asked: it names an input or another output, or
    its folder is missing, not a folder, or not writable."""


class MissingDependencyError(SwdaskError, ImportError):
    """An optional dependency that the asked-for output needs is not installed (the
    message says which extra to install)."""


class DeviceError(SwdaskError, RuntimeError):
    """The requested device (GPU) or backend is not available."""


class ClusterStartError(SwdaskError, RuntimeError):
    """A local Dask cluster cannot start here (e.g. from the top level of a script that
    its worker processes would run again)."""
class ClusterError(SwdaskError, RuntimeError):
    """A Dask scheduler cannot be reached or does not answer, or the cluster cannot go on
    (its workers keep dying, or they cannot start)."""
