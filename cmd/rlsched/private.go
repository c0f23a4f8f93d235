package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/internal/secure"
)

// joinToken is the worker's join token: from file (WORKER_JOIN_TOKEN_FILE,
// which only its owner may read) or from the environment, not both.
func joinToken(file string) (string, error) {
	return secretFrom("WORKER_JOIN_TOKEN", file, "join token")
}

// secretFrom reads a secret from file (its NAME_FILE variable or flag; a
// file only its owner may read) or from the environment variable name, not
// both; "" when neither is set.
func secretFrom(name, file, what string) (string, error) {
	env := os.Getenv(name)
	switch {
	case file != "" && env != "":
		return "", usageError{fmt.Errorf("both %s and %s_FILE are set: set one", name, name)}
	case file != "":
		s, err := secure.ReadSecretFile(file)
		if err != nil {
			return "", fmt.Errorf("cannot read the %s: %w", what, err)
		}
		return s, nil
	}
	return env, nil
}

// workerCredential is what a worker joins with: its own key (WORKER_KEY,
// WORKER_KEY_FILE) or the join token, from which it derives that key.
func workerCredential(tokenFile, keyFile string) (token string, key []byte, err error) {
	if token, err = joinToken(tokenFile); err != nil {
		return "", nil, err
	}
	hexKey, err := secretFrom("WORKER_KEY", keyFile, "worker key")
	if err != nil {
		return "", nil, err
	}
	switch {
	case token != "" && hexKey != "":
		return "", nil, usageError{errors.New("both a join token (WORKER_JOIN_TOKEN[_FILE]) and a worker key (WORKER_KEY[_FILE]) are set: set one")}
	case hexKey != "":
		if key, err = codec.ParseWorkerKey(hexKey); err != nil {
			return "", nil, fmt.Errorf("WORKER_KEY: %w", err)
		}
		return "", key, nil
	case token == "":
		return "", nil, errors.New("no credential: give the worker the master's join token (WORKER_JOIN_TOKEN_FILE, a file of mode 0600, or WORKER_JOIN_TOKEN) or its own key (WORKER_KEY_FILE or WORKER_KEY, printed by `rlsched worker-key ID` where the join token is)")
	}
	if err := codec.CheckJoinToken(token); err != nil {
		return "", nil, fmt.Errorf("WORKER_JOIN_TOKEN: %w", err)
	}
	return token, nil, nil
}
