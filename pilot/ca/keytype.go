package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"math/big"
	"strings"
)

// KeyType of the CA's own key.
type KeyType string

const (
	// KeyECDSA is an ECDSA P-256 key, the default.
	KeyECDSA KeyType = "ecdsa"
	// KeyRSA is an RSA 2048-bit key.
	KeyRSA KeyType = "rsa"
)

// ParseKeyType parses a key type name: "" (the default, ecdsa), "ecdsa",
// "ec" or "rsa", case-insensitive.
func ParseKeyType(s string) (KeyType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "ecdsa", "ec":
		return KeyECDSA, nil
	case "rsa":
		return KeyRSA, nil
	}
	return "", fmt.Errorf("CA key type %q: want ecdsa or rsa", s)
}

// generateKey makes a new private key of type t.
func generateKey(t KeyType) (crypto.Signer, error) {
	switch t {
	case "", KeyECDSA:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case KeyRSA:
		return rsa.GenerateKey(rand.Reader, 2048)
	}
	return nil, fmt.Errorf("CA key type %q: want ecdsa or rsa", string(t))
}

// randomSerial returns a random positive serial number below 2^128.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}
