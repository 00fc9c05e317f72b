"""Language models that induce syntax, one folder per family (``induce/models/<family>/``: its code, its base
configs, its display names, published figures and traits), found by :mod:`induce.models.registry` by
scanning this package; ``common/`` holds the building blocks families share. Families defined outside the
package are imported from ``INDUCE_PLUGINS`` (:mod:`induce.models.plugins`). Each model class declares its
parser kind, its training objective and its traits (:mod:`induce.models.base`).

The package's path extends over ``sys.path`` (:func:`pkgutil.extend_path`): a folder ``induce/models/<family>/``
under another ``sys.path`` entry is scanned as a family too."""
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)
