package obs

// statusClasses are the values of the status_class label: an HTTP status
// reduced to its hundreds, so a label has five values, not sixty.
var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// classOf maps an HTTP status to its index in statusClasses. A status
// outside 100..599 (a handler's bug) counts as 5xx.
func classOf(status int) int {
	switch {
	case status >= 100 && status < 200:
		return 0
	case status >= 200 && status < 300:
		return 1
	case status >= 300 && status < 400:
		return 2
	case status >= 400 && status < 500:
		return 3
	}
	return 4
}
