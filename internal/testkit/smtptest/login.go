package smtptest

import "errors"

// loginServer is the server side of the LOGIN mechanism (an obsolete draft
// that many providers still offer, and go-sasl has only the client of): the
// server asks "Username:" then "Password:", each answered in base64; a
// client may send the user name with the AUTH command already.
type loginServer struct {
	user         []byte
	step         int
	authenticate func(user, pass string) error
}

func (l *loginServer) Next(response []byte) (challenge []byte, done bool, err error) {
	switch l.step {
	case 0:
		l.step = 1
		if response == nil {
			return []byte("Username:"), false, nil
		}
		l.user, l.step = response, 2
		return []byte("Password:"), false, nil
	case 1:
		l.user, l.step = response, 2
		return []byte("Password:"), false, nil
	case 2:
		l.step = 3
		return nil, true, l.authenticate(string(l.user), string(response))
	}
	return nil, false, errors.New("unexpected LOGIN response")
}
