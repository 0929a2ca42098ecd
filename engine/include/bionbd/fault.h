/* SPDX-License-Identifier: MIT */
/*
 * fault.h - fault and delay injection under a volume's members, for testing
 * how a file system, a database or a mirror above behaves when one disk
 * misbehaves.
 *
 * A rule is a line of space-separated words (docs/faults.md has the whole
 * syntax and examples):
 *
 *	fault: member=2 op=write error=EIO rate=1% range=1G-2G seed=7
 *	delay: member=* op=read ms=5
 *
 * Rules sit between the stripe or mirror and each member file, so they see
 * what a member sees: a request split over two members is two bios there,
 * and `after=`/`count=`/`rate=` count those.  They are evaluated in order
 * for every bio: delays of all matching rules add up, the first error wins.
 * With `seed=`, the same sequence of bios meets the same faults, so a
 * failing CI run replays; without it a seed is picked and announced
 * (target_notice) so that it can be given next time.
 */
#ifndef BIONBD_FAULT_H
#define BIONBD_FAULT_H

#include <stddef.h>

enum fault_kind {
	FAULT_ERROR = 0, /* "fault": fail (error=), or tear a write (torn=) */
	FAULT_DELAY = 1, /* "delay": hold bios (ms=), or stall (stall) */
};

/* One rule as written: what front ends collect from flags and config. */
struct fault_text {
	enum fault_kind kind;
	const char *text;
};

/** fault_kind_name - "fault" or "delay": the key a rule is given with. */
const char *fault_kind_name(enum fault_kind kind);

/**
 * fault_rule_check - is @text a valid rule of @kind?
 * @nr_members: the volume's member count, or 0 when not known yet (member
 *              numbers are then checked later, by volume_check)
 * @errbuf: on failure a message naming the word at fault (without the key)
 *
 * Returns 0 or -EINVAL.
 */
int fault_rule_check(enum fault_kind kind, const char *text,
		     unsigned int nr_members, char *errbuf, size_t errlen);

/**
 * fault_rule_absolute - @text with a relative file=PATH joined to @dir
 * @dir: an absolute directory; NULL: the current one (path.h says why)
 * @out: receives the rule; the caller owns it (free)
 *
 * The rest of the rule is kept as written.  Returns 0, -ENOMEM, getcwd's
 * -errno, or -EINVAL when @dir holds a space or a tab (the path would be
 * cut into two words: such a rule must give its file whole).
 */
int fault_rule_absolute(const char *text, const char *dir, char **out);

#endif /* BIONBD_FAULT_H */
