"""Modality plug-ins: one folder per modality (``text/``, ``image/``), each holding everything of its
modality: the preset schema, data preparation, the build and training path, the architectures, the
detector context and the feature families.

Nothing here is imported by the core (import-linter forbids it): the core registers each modality by its
module path (:data:`trojanscope.models.modalities.MODALITIES`) and imports the package on first use. A
package's ``__init__`` only declares its facets and feature families, as data, so reading it is cheap.
"""
