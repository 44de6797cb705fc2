"""Text below storage: normalising, analysis (tokens, languages), filters, chunking and the files hybridkb reads."""
