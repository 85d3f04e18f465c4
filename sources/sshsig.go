package sources

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strings"

	"golang.org/x/crypto/ssh"
)

// The SSH signature format git writes with gpg.format=ssh (OpenSSH's PROTOCOL.sshsig):
//
//	-----BEGIN SSH SIGNATURE-----
//	base64 of: "SSHSIG" uint32(1) string(public key) string(namespace) string(reserved)
//	           string(hash algorithm) string(signature)
//	-----END SSH SIGNATURE-----
//
// The signature is made over "SSHSIG" string(namespace) string(reserved)
// string(hash algorithm) string(H(message)). git signs in the namespace "git".
//
// Why our own reader and not github.com/hiddeco/sshsig (Flux's): the cryptography is
// golang.org/x/crypto/ssh's either way; what is ours is the framing above (about forty lines,
// fuzzed by FuzzSignatures and checked against signatures git and ssh-keygen make in
// TestVerifyGitSSHSignature) and the policy, which that module does not hold either: it
// verifies ssh-dss and ssh-rsa (SHA-1) signatures, and knows nothing of allowed-signers
// lines. So it would add a module to the graph and take away none of the checks below.
const (
	sshSigMagic     = "SSHSIG"
	sshSigBegin     = "-----BEGIN SSH SIGNATURE-----"
	sshSigEnd       = "-----END SSH SIGNATURE-----"
	sshSigNamespace = "git"
)

// sshSignature is a parsed SSH signature.
type sshSignature struct {
	key       ssh.PublicKey
	namespace string
	hashAlg   string
	sig       *ssh.Signature
}

// sshSigWire is the binary layout after the magic.
type sshSigWire struct {
	Version   uint32
	PublicKey []byte
	Namespace string
	Reserved  []byte
	HashAlg   string
	Signature []byte
}

// sshSignedData is what the signature covers.
type sshSignedData struct {
	Namespace string
	Reserved  []byte
	HashAlg   string
	Hash      []byte
}

// parseSSHSignature reads an armored SSH signature.
func parseSSHSignature(armored string) (*sshSignature, error) {
	s := strings.TrimSpace(armored)
	body, ok := strings.CutPrefix(s, sshSigBegin)
	if !ok {
		return nil, errors.New("not an SSH signature")
	}
	body, ok = strings.CutSuffix(body, sshSigEnd)
	if !ok {
		return nil, errors.New("SSH signature has no end line")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(body), ""))
	if err != nil {
		return nil, fmt.Errorf("SSH signature is not base64: %w", err)
	}
	rest, ok := bytes.CutPrefix(raw, []byte(sshSigMagic))
	if !ok {
		return nil, errors.New("SSH signature lacks the SSHSIG magic")
	}
	var w sshSigWire
	if err := ssh.Unmarshal(rest, &w); err != nil {
		return nil, fmt.Errorf("SSH signature is malformed: %w", err)
	}
	if w.Version != 1 {
		return nil, fmt.Errorf("SSH signature version %d is not supported", w.Version)
	}
	key, err := ssh.ParsePublicKey(w.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("SSH signature public key: %w", err)
	}
	sig := new(ssh.Signature)
	if err := ssh.Unmarshal(w.Signature, sig); err != nil {
		return nil, fmt.Errorf("SSH signature blob: %w", err)
	}
	return &sshSignature{key: key, namespace: w.Namespace, hashAlg: w.HashAlg, sig: sig}, nil
}

// verify checks the signature over message, made by s.key in namespace git.
func (s *sshSignature) verify(message []byte) error {
	if s.namespace != sshSigNamespace {
		return fmt.Errorf("signature is for namespace %q, not %q", s.namespace, sshSigNamespace)
	}
	var h hash.Hash
	switch s.hashAlg {
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return fmt.Errorf("hash algorithm %q is not supported", s.hashAlg)
	}
	h.Write(message)
	signed := append([]byte(sshSigMagic), ssh.Marshal(sshSignedData{
		Namespace: s.namespace, HashAlg: s.hashAlg, Hash: h.Sum(nil)})...)
	return s.key.Verify(signed, s.sig)
}

// acceptedAlgorithm refuses the signature algorithms that hash with SHA-1: DSA (ssh-dss,
// also at most 1024 bits) and RSA with SHA-1 (ssh-rsa, refused by ssh-keygen too). An RSA key
// signs with rsa-sha2-256 or rsa-sha2-512.
func (s *sshSignature) acceptedAlgorithm() error {
	if err := acceptedKeyType(s.key.Type()); err != nil {
		return err
	}
	switch s.sig.Format {
	case sshDSA:
		return errors.New("DSA signatures (ssh-dss) are not accepted: they hash with SHA-1")
	case ssh.KeyAlgoRSA:
		return errors.New("RSA signatures with SHA-1 (ssh-rsa) are not accepted")
	}
	return nil
}
