"""The text modality's feature families (registered by ``FAMILIES`` in the package's ``__init__``)."""
