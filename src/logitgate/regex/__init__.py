"""Regular expressions: parsing (``parser``), character sets (``charsets``) and the syntax tree (``ast``)."""
