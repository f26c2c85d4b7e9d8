"""The machinery of ``flask authflow users import``: the model of a user to import
(:mod:`.model`), the sources that read one (Flask-Security-Too, files, ...), the plan that
says what carries and what must be restored, and the writer."""
