#!/usr/bin/env bash
# Installs what builds the book (mkdocs.yml, docs/*.md):
#   .peers/book  a venv with .ci/book-requirements.txt (exact pins: MkDocs 1.6.1 and its
#                dependencies, nothing else)
#                run: .peers/book/bin/mkdocs build --strict   (into target/book; a broken link, a
#                missing anchor or a page left out of the nav fails, as mkdocs.yml's `validation:` says)
# Idempotent and fast when done (the venv's marker .peers/book.ok holds what it installed); a few
# seconds from PyPI when not. Safe to run concurrently (flock).
# Env: PEERS_PYTHON = interpreter for the venv (default python3.11, else python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="$ROOT/.peers"
REQS="$ROOT/.ci/book-requirements.txt"
mkdir -p "$PEERS"

exec 9>"$PEERS/.book.lock"
flock 9

log() { echo "install-book: $*" >&2; }

py="${PEERS_PYTHON:-}"
if [[ -z "$py" ]]; then
  if command -v python3.11 >/dev/null; then py=python3.11; else py=python3; fi
fi
py_version="$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
want="python=$py_version requirements-sha256=$(sha256sum "$REQS" | cut -d' ' -f1)"
if [[ "$(cat "$PEERS/book.ok" 2>/dev/null || true)" == "$want" && -x "$PEERS/book/bin/mkdocs" ]]; then
  log "venv: already installed ($want)"
else
  log "venv: creating .peers/book with $py ($py_version), installing $REQS"
  rm -rf "$PEERS/book" "$PEERS/book.ok"
  "$py" -m venv "$PEERS/book"
  "$PEERS/book/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$REQS" >&2
  "$PEERS/book/bin/python" -m pip check >&2
  [[ -x "$PEERS/book/bin/mkdocs" ]] || { log "venv has no mkdocs"; exit 1; }
  echo "$want" >"$PEERS/book.ok"
fi

log "ok"
