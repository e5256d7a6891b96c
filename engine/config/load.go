package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Load reads and validates the TOML file at path.
func Load(path string) (*Config, error) {
	cfg, err := Read(path)
	if err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

// Read reads the TOML file at path without validating values, so
// flags can override them before Validate.
func Read(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: fmt.Sprintf("cannot read: %v", unwrapPathError(err))}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: locate %s: %w", path, err)
	}
	return Parse(path, filepath.Dir(abs), data)
}

// Parse decodes TOML without validating values. Relative paths in it
// are resolved against dir. Unknown keys and wrong types are errors that
// name the file, line and key.
func Parse(file, dir string, data []byte) (*Config, error) {
	cfg := &Config{src: configSource{file: file, dir: dir, flags: map[string]string{}}}
	lines, perr := keyLines(data)
	cfg.src.lines = lines
	if perr != nil {
		return nil, Errors{cfg.decodeError(perr)}
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			var errs Errors
			for i := range strict.Errors {
				e := &strict.Errors[i]
				line, _ := e.Position()
				key := strings.Join(e.Key(), ".")
				if p := cfg.src.pathAt(line); p != "" {
					key = p
				}
				errs = append(errs, &Error{File: file, Line: line, Key: key,
					Msg: "unknown key; " + expectedKeys(e.Key())})
			}
			return nil, errs
		}
		return nil, Errors{cfg.decodeError(err)}
	}
	return cfg, nil
}

// decodeError turns a go-toml error into an Error with our wording.
func (c *Config) decodeError(err error) *Error {
	var se *shapeError
	if errors.As(err, &se) {
		return &Error{File: c.src.file, Line: se.line, Key: se.key, Msg: "wrong type: expected " + expectedType(se.key)}
	}
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		return &Error{File: c.src.file, Msg: err.Error()}
	}
	line, _ := de.Position()
	keyParts := de.Key()
	key := c.src.pathAt(line)
	if key == "" {
		key = strings.Join(keyParts, ".")
	}
	msg := strings.TrimPrefix(de.Error(), "toml: ")
	if strings.Contains(msg, "cannot decode") || strings.Contains(msg, "cannot be stored") ||
		strings.Contains(msg, "cannot store") {
		if want := expectedType(key); want != "" {
			msg = "wrong type: expected " + want
		}
	}
	return &Error{File: c.src.file, Line: line, Key: key, Msg: msg}
}

// pathAt returns the key path defined on line, if exactly one is.
func (s *configSource) pathAt(line int) string {
	if line <= 0 {
		return ""
	}
	found := ""
	for k, l := range s.lines {
		if l == line && (found == "" || len(k) > len(found)) {
			found = k
		}
	}
	return found
}

// SetFlag overrides a key from a command-line flag.
func (c *Config) SetFlag(flag string, value string) error {
	if c.src.flags == nil {
		c.src.flags = map[string]string{}
	}
	switch flag {
	case "root":
		c.Root = value
		c.src.flags["root"] = "--root"
	case "listen":
		c.Listen = value
		c.src.flags["listen"] = "--listen"
	case "self-signed":
		c.selfSigned = value == "true"
		c.src.flags["self-signed"] = "--self-signed"
	case "workers":
		n, err := strconv.Atoi(value)
		if err != nil {
			return &Error{Key: "--workers", Msg: fmt.Sprintf("%q is not a whole number", value)}
		}
		c.Workers = n
		c.src.flags["workers"] = "--workers"
	default:
		return fmt.Errorf("config: unknown flag %s", flag)
	}
	return nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
