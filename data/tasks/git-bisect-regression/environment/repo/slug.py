"""Helpers to turn titles into URL slugs."""
import re
import unicodedata

_NON_ALNUM = re.compile(r"[^a-z0-9]")


def slugify(text, sep="-"):
    """Return a lower-case ASCII slug of text.

    Accents are removed; runs of any other characters become one separator."""
    text = unicodedata.normalize("NFKD", text)
    text = text.encode("ascii", "ignore").decode("ascii").lower()
    text = _NON_ALNUM.sub(sep, text)
    return text.strip(sep)

def unslugify(slug, sep="-"):
    """Best-effort inverse of slugify: words separated by spaces, capitalised."""
    return " ".join(w.capitalize() for w in slug.split(sep) if w)

def is_slug(text, sep="-"):
    """True if text is already a valid slug."""
    return bool(text) and slugify(text, sep) == text

def truncate_slug(slug, max_length, sep="-"):
    """Cut a slug to at most max_length characters without splitting words."""
    if max_length <= 0:
        return ""
    if len(slug) <= max_length:
        return slug
    cut = slug[:max_length + 1]
    if sep in cut:
        cut = cut[:cut.rindex(sep)]
    else:
        cut = cut[:max_length]
    return cut.strip(sep)

def unique_slug(text, taken, sep="-"):
    """slugify(text), with -2, -3, ... appended until it is not in taken."""
    base = slugify(text, sep)
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}{sep}{n}"
    return slug

def slug_path(*titles, sep="-"):
    """Join the slugs of several titles with '/'."""
    return "/".join(slugify(t, sep) for t in titles)


if __name__ == "__main__":
    import sys
    for line in sys.stdin:
        print(slugify(line.strip()))
