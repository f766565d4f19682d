"""Ingestion: list a file source, detect what each file really is, load it, filter it, stage it.

Modules, in the order a file meets them:
``sources`` (and ``bird``) list files from a directory, glob, ``.zip`` or fsspec URL with size caps;
``datamind.formats`` (below every stage, as profiling and synthesis reload files through it too) detects
format, encoding, delimiter, decimal mark and header rows from the bytes (``sniff``) and turns a file into
tables plus the ``read_options`` that reload each table identically, in a capped child (``parse_worker``);
``datamind.decontamination`` rejects a file that is a benchmark's;
``rules`` judges every table and file with stable reason codes;
``stage`` plans shards (hashing, dedup, rerun = no-op) and writes ``catalog/files``.
"""
