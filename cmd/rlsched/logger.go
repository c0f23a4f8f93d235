package main

import (
	"os"
	"time"

	"github.com/rs/zerolog"
)

// newLogger logs JSON when LOG_FORMAT=json, else a console format for people.
func newLogger() zerolog.Logger {
	level := zerolog.InfoLevel
	if l, err := zerolog.ParseLevel(os.Getenv("LOG_LEVEL")); err == nil && l != zerolog.NoLevel {
		level = l
	}
	if os.Getenv("LOG_FORMAT") == "json" {
		return zerolog.New(os.Stderr).Level(level).With().Timestamp().Logger()
	}
	w := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}
