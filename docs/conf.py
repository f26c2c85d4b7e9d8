"""Sphinx configuration of the flask-authflow documentation."""

project = "flask-authflow"
author = "flask-authflow developers"
release = "0.7.0"
extensions = ["sphinx.ext.autodoc"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
