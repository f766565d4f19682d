"""The question templates, one module per family; importing this package registers them all.

Each template is a generator function decorated with ``@template(category)`` (see ``generators``).
"""

from datamind.synth.offline.templates import derived, lookup, statistics  # noqa: F401 - registration

__all__ = ["derived", "lookup", "statistics"]
