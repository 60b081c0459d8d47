"""Text in and out (pure): the bounded reader behind every ``read_*(path)`` (:mod:`~.textfile`),
fast indented JSON (:mod:`~.jsontext`), a YAML writer that keeps comments (:mod:`~.yamlout`), and
the owner-only (0600/0700) creation of the files and folders mslaunch writes (:mod:`~.private`)."""
