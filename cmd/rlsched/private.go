package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/rlsched/rlsched/internal/secure"
)

// joinToken is the worker's join token: from file (WORKER_JOIN_TOKEN_FILE,
// which only its owner may read) or from the environment, not both.
func joinToken(file string) (string, error) {
	env := os.Getenv("WORKER_JOIN_TOKEN")
	switch {
	case file != "" && env != "":
		return "", usageError{errors.New("both WORKER_JOIN_TOKEN and WORKER_JOIN_TOKEN_FILE are set: set one")}
	case file != "":
		tok, err := secure.ReadSecretFile(file)
		if err != nil {
			return "", fmt.Errorf("cannot read the join token: %w", err)
		}
		return tok, nil
	}
	return env, nil
}
