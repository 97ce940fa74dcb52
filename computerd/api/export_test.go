package api

// MatchGlob exposes the glob matcher of find and grep to the black-box tests.
func MatchGlob(pattern, p string) (bool, error) {
	g, err := compileGlob(pattern)
	if err != nil {
		return false, err
	}
	return g.match(p), nil
}
