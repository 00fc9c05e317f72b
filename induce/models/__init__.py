"""Language models that induce syntax (chosen by name from :mod:`induce.models.registry`)."""
