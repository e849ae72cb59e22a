#!/bin/bash
# The text a LoRA fine-tune of the default model (kvad-kjv, trained on the King James Bible) is
# measured on: C. H. Spurgeon's "The Treasury of David" (1869-1885, public domain), his
# commentary on Psalms 1-20, from Debian's sword-comm-tdavid package via diatheke. Victorian
# expository prose, not scripture: unlike the base's training text, in the same character set.
# Markup stripped, lines folded at 79 like the base's corpus. Deterministic.
#   usage: bench/lora/corpus.sh [OUTPUT]   (default: ${TMPDIR:-/tmp}/tdavid.txt)
set -euo pipefail
out="${1:-${TMPDIR:-/tmp}/tdavid.txt}"
if ! command -v diatheke >/dev/null 2>&1 || ! dpkg -s sword-comm-tdavid >/dev/null 2>&1; then
    echo "corpus.sh: installing diatheke and sword-comm-tdavid" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y diatheke sword-comm-tdavid >&2 ||
        { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y diatheke sword-comm-tdavid >&2; }
fi
tmp="$(mktemp "${out}.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
# One entry per verse: drop the "Psalms N:M: " key and the module's trailing "(TDavid)" line,
# the OSIS tags, and collapse the spaces they leave.
diatheke -b TDavid -f plaintext -k Ps 1-20 </dev/null |
    LC_ALL=C sed -E -e 's/^Psalms [0-9]+:[0-9]+: //' -e '/^\(TDavid\)$/d' -e 's/<[^>]*>/ /g' \
        -e 's/&quot;/"/g' -e "s/&apos;/'/g" -e 's/&amp;/\&/g' -e 's/&lt;/</g' -e 's/&gt;/>/g' \
        -e 's/ +/ /g' -e 's/^ //' -e 's/ $//' |
    LC_ALL=C fold -s -w 79 | LC_ALL=C sed -E 's/ +$//' >"$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "$out $(wc -c <"$out") bytes sha256 $(sha256sum "$out" | cut -d' ' -f1)"
