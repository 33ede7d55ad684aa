"""The web for the model: fetching a page safely (`fetch`, with the address rules of
`addresses`), turning it into text (`extract`) and searching (`search`). The tools
that offer them are in klaw.tools.web; docs/web.md says what they do."""
