"""Verdicts where mail is decided: what a prediction says of a message (its score on the
operator's scale, the ham/spam/unsure band, the strongest clues), the headers a mail system
reads them from, and the front ends that give them outside Kafka (`stream-nb filter`, a pipe
for procmail, maildrop and Dovecot's sieve extprograms). The worker's predictions and these
front ends compute a verdict by the same rules (`rules.VerdictRules`)."""
