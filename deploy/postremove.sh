#!/bin/sh
set -e
if [ "$1" = purge ]; then
	rm -rf /var/lib/engine /var/cache/engine /var/log/engine
	if getent passwd engine >/dev/null; then
		deluser --system engine >/dev/null || true
	fi
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
