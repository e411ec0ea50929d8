"""Images as every stage reads them: decode and resize (load.py), letterbox and its inverse, the --cache ram store."""
