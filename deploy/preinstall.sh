#!/bin/sh
set -e
# The service's own user: no login, no home of its own beyond its state.
if ! getent passwd engine >/dev/null; then
	adduser --system --group --no-create-home --home /nonexistent --shell /usr/sbin/nologin engine >/dev/null
fi
