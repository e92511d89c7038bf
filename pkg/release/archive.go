package release

// ArchiveOf returns the archive a member artifact was taken out of (the
// artifact with the member's URL that is not itself a member); ok is false
// for an artifact that is no member.
func (s *Set) ArchiveOf(a Artifact) (Artifact, bool) {
	if a.Member == "" {
		return Artifact{}, false
	}
	for _, o := range s.Artifacts {
		if o.Member == "" && o.URL == a.URL && o.Arch == a.Arch && o.Name != a.Name {
			return o, true
		}
	}
	return Artifact{}, false
}
