package mysql

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// unavailableConnector marks every failure to open a connection as
// core.ErrUnavailable, so that callers can tell "the server is down or
// refuses us" (retry later; the API answers 503) from an error of the
// statement itself.
//
// One place covers every method: database/sql opens connections only through
// the connector, and when a pooled connection breaks mid-call (driver.
// ErrBadConn) it retries on a new one, so a server that went away surfaces
// here. The original error stays in the chain (errors.Is still finds
// driver.ErrBadConn, errors.As the *net.OpError).
type unavailableConnector struct {
	driver.Connector
}

func (c unavailableConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil && ctx.Err() == nil { // a caller's deadline or cancel is its own doing
		return nil, fmt.Errorf("%w: %w", core.ErrUnavailable, err)
	}
	return conn, err
}
