package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
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

// marshalKeyPEM encodes key as a PKCS#8 "PRIVATE KEY" PEM block.
func marshalKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseKeyPEM decodes the first private key block of data: PKCS#8
// ("PRIVATE KEY"), PKCS#1 ("RSA PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY").
func parseKeyPEM(data []byte) (crypto.Signer, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("no private key PEM block")
		}
		var (
			key any
			err error
		)
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			continue // e.g. "EC PARAMETERS" written by openssl ecparam
		}
		if err != nil {
			return nil, fmt.Errorf("parse %s block: %w", block.Type, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s block: key type %T cannot sign", block.Type, key)
		}
		return signer, nil
	}
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
