package rig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Response is a REST answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r Response) String() string {
	s := string(r.Body)
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return fmt.Sprintf("%d %s", r.Status, s)
}

// JSON decodes the body into v, failing t when it is not JSON.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("answer %d is not JSON: %v\n%s", r.Status, err, r.Body)
	}
}

// Do sends one REST request to url with hc: body is nil, []byte, string
// or a value to marshal as JSON; token, when set, is sent as a bearer
// token; hdr are header name/value pairs ("Host" sets the request's host).
func Do(hc *http.Client, method, url, token string, body any, hdr ...string) (Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// Client talks REST to one server as one user (or none). It is safe to
// use from several goroutines.
type Client struct {
	T     testing.TB
	Base  string // http://host:port
	Token string // sent as a bearer token when set
	HC    *http.Client
}

// NewClient is a client of base with a connection pool of its own.
func NewClient(t testing.TB, base string) *Client {
	return &Client{T: t, Base: strings.TrimRight(base, "/"),
		HC: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{}}}
}

// As is a client of the same server sending token.
func (c *Client) As(token string) *Client {
	c2 := *c
	c2.Token = token
	return &c2
}

// Do sends a request to path (see Do).
func (c *Client) Do(method, path string, body any, hdr ...string) (Response, error) {
	return Do(c.HC, method, c.Base+path, c.Token, body, hdr...)
}

// Must sends a request and fails the test unless the status is want; the
// answer is decoded into out when out is not nil.
func (c *Client) Must(method, path string, body any, want int, out any, hdr ...string) Response {
	c.T.Helper()
	r, err := c.Do(method, path, body, hdr...)
	if err != nil {
		c.T.Fatalf("%s %s: %v", method, path, err)
	}
	if r.Status != want {
		c.T.Fatalf("%s %s: got %s, want status %d", method, path, r, want)
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			c.T.Fatalf("%s %s: cannot decode %s: %v", method, path, r, err)
		}
	}
	return r
}

// User is the API's user.
type User struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
	Role     string `json:"role"`
}

// Register creates user name with Password and returns it.
func (c *Client) Register(name string) User {
	c.T.Helper()
	var u User
	c.Must("POST", "/api/auth/register", map[string]string{"username": name, "password": Password}, 201, &u)
	if u.Username != name || u.ID <= 0 {
		c.T.Fatalf("register %s: got %+v", name, u)
	}
	return u
}

// Login returns a client carrying the token of name (password pw).
func (c *Client) Login(name, pw string) *Client {
	c.T.Helper()
	var ans struct {
		Token string `json:"token"`
		User  User   `json:"user"`
	}
	c.Must("POST", "/api/auth/login", map[string]string{"username": name, "password": pw}, 200, &ans)
	if ans.Token == "" || ans.User.Username != name {
		c.T.Fatalf("login %s: got %+v", name, ans)
	}
	return c.As(ans.Token)
}

// Signup registers name and returns a client logged in as it.
func (c *Client) Signup(name string) (*Client, User) {
	c.T.Helper()
	u := c.Register(name)
	return c.Login(name, Password), u
}
