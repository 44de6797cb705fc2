"""The command line: ``hybridkb COMMAND`` (commands.py) and the commands that live beside their feature."""
