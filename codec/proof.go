package codec

import (
	"crypto/hmac"
	"crypto/sha256"
)

// JoinProof is what a worker sends in Hello.proof to show it knows the join
// token without sending it: HMAC-SHA256(key = token, msg = nonce ||
// workerID), nonce being the master's Challenge. The master computes the
// same and compares with hmac.Equal.
func JoinProof(token, nonce []byte, workerID string) []byte {
	mac := hmac.New(sha256.New, token)
	mac.Write(nonce)
	mac.Write([]byte(workerID))
	return mac.Sum(nil)
}
