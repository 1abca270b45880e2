"""Sequences: alphabets and codes, FASTA/FASTQ reading, batches (and the one input
normaliser), the Parquet sequence store and ingest.

- :mod:`.alphabet`: residue alphabets, letters to uint8 codes and back;
- :mod:`.fastx`: FASTA/FASTQ records, checked letter by letter;
- :mod:`.batch`: :class:`~.batch.SequenceBatch` (sequences as flat arrays) and
  :func:`~.batch.as_batch` / :func:`~.batch.one_sequence`, through which every job takes
  its sequences;
- :mod:`.store`: :class:`~.store.SequenceStore`, a length-sorted Parquet dataset, and
  :func:`~.store.load_sequences`;
- :mod:`.ingest`: :func:`~.ingest.ingest` and :func:`~.ingest.open_database`.
"""
