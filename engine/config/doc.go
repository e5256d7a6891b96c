// Package config is the engine's configuration: the TOML file
// (engine.toml) and the serve flags that override it, decoded strictly
// (unknown keys are errors), checked, and filled in with defaults.
//
// It does not serve anything: it opens no socket, loads no certificate
// and probes no kernel feature. A path is checked to exist and a PEM file
// to be readable, nothing more; the engine package turns a Config into a
// running server.
//
// Every mistake is reported at once, each as an Error that names the file,
// the line and the key (or the flag) and says what was expected.
//
// Invariant: a Config that passed Validate is complete. Every value is in
// range, every path is absolute, and every size, duration and limit
// holds its value or its default. A zero value that remains (workers = 0:
// one per CPU; limit_rate = 0: unlimited; a nil protocol switch: on, read
// with On) means what its field documents, so code that serves from a
// Config checks no value again.
package config
