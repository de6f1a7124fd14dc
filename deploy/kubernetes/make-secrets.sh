#!/bin/sh
# Writes cluster-secrets.env in the current directory (an overlay's), from which the overlay's
# secretGenerator makes the Secret `vessel-cluster`. Run it once per cluster: it refuses to
# replace an existing file, because a new master key would leave every sealed tenant secret
# unreadable, and a new internal secret breaks the API → node hop until every pod has it.
set -eu
out=cluster-secrets.env
if [ -e "$out" ]; then
  echo "$out exists; refusing to replace it (see docs/scaling.md, \"Secrets\")" >&2
  exit 1
fi
rand_b64() { head -c "$1" /dev/urandom | base64 | tr -d '\n'; }
umask 077
{
  # 32 random bytes, as base64: what VESSEL_MASTER_KEY accepts (src/cli/data-dir.ts).
  echo "master-key=$(rand_b64 32)"
  # vsl_ + 32 random bytes in base64url, the form of every Vessel token.
  echo "admin-token=vsl_$(rand_b64 32 | tr '+/' '-_' | tr -d '=')"
  # The API → node hop's shared secret (issue 15 §2): 32 random bytes, hex.
  echo "internal-secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
} > "$out"
echo "wrote $out (mode 0600); keep a copy in your secret store: it is not in git" >&2
