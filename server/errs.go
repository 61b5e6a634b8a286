package server

import (
	"errors"

	"github.com/sandboxd/sandboxd/toolerr"
)

func asToolErr(err error) *toolerr.Error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	return nil
}
