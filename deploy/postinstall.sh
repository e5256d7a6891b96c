#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
	# Started on install, as Debian's nginx is; on an upgrade the running
	# one takes the new binary without dropping a request.
	if [ "$1" = configure ] && [ -n "$2" ] && systemctl is-active --quiet engine; then
		systemctl kill -s USR2 engine || true
	else
		systemctl enable --now engine >/dev/null || true
	fi
fi
