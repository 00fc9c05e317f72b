"""Language models that induce syntax, one folder per family (``induce/models/<family>/``: its code, its base
configs, its display names, published figures and traits), found by :mod:`induce.models.registry` by
scanning this package; ``common/`` holds the building blocks families share. Families defined outside the
package are imported from ``INDUCE_PLUGINS`` (:mod:`induce.models.plugins`). Each model class declares its
parser kind, its training objective and its traits (:mod:`induce.models.base`).

The package's path extends over ``sys.path``: a folder ``induce/models/<family>/`` under another ``sys.path``
entry is scanned as a family too (after this package's own folder, whose families win a name they share), and
:func:`induce.config.family_roots` finds its configs the same way."""
import os
import sys


def _extended_path(own: list) -> list:
    """``own`` and then ``<entry>/induce/models`` of every ``sys.path`` entry that has that folder, each once."""
    seen = {os.path.realpath(folder) for folder in own}
    path = list(own)
    for entry in sys.path:
        folder = os.path.join(entry or ".", "induce", "models")
        if isinstance(entry, str) and os.path.isdir(folder) and os.path.realpath(folder) not in seen:
            seen.add(os.path.realpath(folder))
            path.append(folder)
    return path


__path__ = _extended_path(__path__)
