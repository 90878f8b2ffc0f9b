# A message moved out of Junk (not to the Trash): stream_nb takes back the spam it learned of it
# (nothing, when it was filed there by the filter's verdict alone) and learns it as ham.
require ["vnd.dovecot.pipe", "copy", "imapsieve", "environment", "variables"];

if environment :matches "imap.mailbox" "*" {
  set "mailbox" "${1}";
}
if string "${mailbox}" "Trash" {
  stop;
}
pipe :copy "stream-nb-learn" ["--ham", "--unlearn", "spam"];
