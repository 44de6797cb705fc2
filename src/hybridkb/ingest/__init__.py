"""Putting files into a collection: the pipeline (read, chunk, embed, store), sync with the folders a collection follows, and the walk over them."""
