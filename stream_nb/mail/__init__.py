"""Raw e-mail -> what the featuriser reads: subject, body text and '#' evidence features.

`parse_mail` (in `parse.py`) reads MIME, decodes bodies and headers and collects evidence;
`html.py` turns an HTML part into its visible text and the evidence in its markup. Pure
functions over the bytes given: no I/O, no Kafka, no model.
"""

from stream_nb.mail.parse import DEFAULT_MAX_BYTES, ParsedMail, parse_mail

__all__ = ["DEFAULT_MAX_BYTES", "ParsedMail", "parse_mail"]
