"""Developer tools: the demo, the retrieval evaluation and a tiny PDF writer for tests and the demo."""
