"""Text in and out (pure): the bounded reader behind every ``read_*(path)`` (:mod:`~.textfile`),
fast indented JSON (:mod:`~.jsontext`) and a YAML writer that keeps comments (:mod:`~.yamlout`)."""
