# A message moved (or appended) into Junk: stream_nb learns it as spam. One learned as ham before
# (moved out of Junk earlier) is relearned: the worker knows it by its Message-ID, and the
# latest label wins.
require ["vnd.dovecot.pipe", "copy", "imapsieve"];

pipe :copy "stream-nb-learn" ["--spam"];
