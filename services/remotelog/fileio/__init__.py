"""Local file I/O the store and its clients share: page-cache reads, descriptor passing."""
