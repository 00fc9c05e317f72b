"""Language models that induce syntax (chosen by name from :mod:`induce.models.registry`; families defined
outside the package are imported from ``INDUCE_PLUGINS`` by :mod:`induce.models.plugins`). Each model class
declares its parser kind and its training objective (:mod:`induce.models.base`)."""
