"""The self-contained HTML report: the page, its SVG charts, the transcripts and the
escaping they share."""
