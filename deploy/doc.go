// Package deploy holds what runs the engine as a service: the systemd
// unit, the commented default configuration, the logrotate snippet, the
// modules loaded at boot, the package's scripts and nfpm's description of
// the Debian package (scripts/package.sh builds it). The package has no
// code; its test builds the package twice and checks it.
package deploy
