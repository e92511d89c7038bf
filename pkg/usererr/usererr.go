// Package usererr is the one error type that carries a fix for the user.
//
// Packages return it where they know what the user should do next (a host key
// to remove, a flag to pass); only internal/cli prints it. Keeping the hint
// next to the error, instead of in the CLI, means the place that understands
// the failure is the place that explains it.
package usererr

import (
	"errors"
	"fmt"
)

// Exit codes by class of failure, as kubeadm does.
const (
	CodeFailure   = 1 // something went wrong at run time
	CodeUsage     = 2 // bad flags or arguments
	CodeInventory = 3 // the inventory file is invalid
)

// Error is an error with a hint for the user and an exit code.
type Error struct {
	Err  error
	Hint string // one or more lines telling the user how to fix it; may be empty
	Code int    // exit code; 0 means CodeFailure
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// New wraps err with a hint and the default failure code.
func New(err error, hint string) *Error { return &Error{Err: err, Hint: hint, Code: CodeFailure} }

// Errorf is fmt.Errorf plus a hint.
func Errorf(hint, format string, args ...any) *Error {
	return New(fmt.Errorf(format, args...), hint)
}

// WithCode wraps err with a hint and an explicit exit code.
func WithCode(err error, code int, hint string) *Error {
	return &Error{Err: err, Hint: hint, Code: code}
}

// HintOf returns the hint of the outermost *Error in err's chain, if any.
func HintOf(err error) string {
	var ue *Error
	if errors.As(err, &ue) {
		return ue.Hint
	}
	return ""
}

// CodeOf returns the exit code for err: the code of the outermost *Error in
// its chain, or CodeFailure.
func CodeOf(err error) int {
	var ue *Error
	if errors.As(err, &ue) && ue.Code != 0 {
		return ue.Code
	}
	return CodeFailure
}
